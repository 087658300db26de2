"""What every layer may use: the user-error type (`errors`), the range checks of the typed configs (`config_checks`),
device and precision choice (`device`), files written whole or not at all and the user cache folder (`atomic_files`),
and glibc's malloc thresholds (`malloc_tuning`). Nothing here knows models, data, tokenizers or command lines."""
