"""Small utilities shared by every layer (no torch, no model)."""
