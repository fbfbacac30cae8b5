"""Fitting a self-model: the trainer (ownership, networks), the joint placement fit, and the poses to
record next."""
