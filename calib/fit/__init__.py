"""The fit: one robust solver, one identifiability analysis, the pose-set checks, hold-out and folds."""
