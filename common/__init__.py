"""What every layer may use; nothing here knows models, data, tokenizers or command lines."""
