"""A model config read as hostile input, into one frozen ModelConfig (model.py)."""
