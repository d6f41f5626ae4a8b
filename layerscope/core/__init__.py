"""Pure data and arithmetic: imports neither torch nor onnx."""
