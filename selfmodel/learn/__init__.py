"""Fitting a self-model: the trainer (ownership, networks), the joint placement fit, the poses to
record next, and the train job that writes a model folder."""
