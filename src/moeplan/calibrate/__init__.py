"""Calibration to a cluster: training logs in, fitted timing constants and memory reserve out (:mod:`.fit`)."""
