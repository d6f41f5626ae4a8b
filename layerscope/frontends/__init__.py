"""Model specs -> something runnable or analysable."""
