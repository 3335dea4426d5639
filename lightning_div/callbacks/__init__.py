"""Lightning callbacks: they gather texts, call the metric/embedding/scoring modules, and log."""
