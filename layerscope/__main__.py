from layerscope.cli.main import entry

entry()
