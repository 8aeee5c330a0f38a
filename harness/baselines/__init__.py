"""Generated baseline-calibration tables, one per backend and transformers release (see harness/calibration.py)."""
