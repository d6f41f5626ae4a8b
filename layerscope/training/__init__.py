"""Training workloads: data, recipes, the instrumented loop, checkpoints and ablations."""
