"""Measuring a self-model and its export against a simulated session's truth/ (metrics, the export's
figures, planning on the true arm). Evaluation only: no fit and no export imports it."""
