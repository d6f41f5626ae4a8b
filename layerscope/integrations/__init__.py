"""Callbacks for the common trainers: ``integrations.lightning`` (Lightning) and
``integrations.transformers`` (the Hugging Face Trainer). Each starts a ``training.watch.Watch``
when training starts and stops it when training ends, so the breakdown is the one
``layerscope run`` gives for the same script. The trainers are optional extras
(``pip install layerscope[lightning]`` / ``layerscope[hf]``): importing this package or
``layerscope`` never imports them."""
