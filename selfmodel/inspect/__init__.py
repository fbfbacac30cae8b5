"""Reading a trained self-model: the damage check, what changed between two models, the verdicts the
commands print, and meshes of the learned body."""
