"""Small utilities every layer may use: the user-error type and the entry scripts' one-line error path,
device and precision choice, atomic file writes and the user cache folder. Nothing here knows models,
data or tokenizers."""
