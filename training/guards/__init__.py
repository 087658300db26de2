"""What keeps a run from ending badly: `signals` (Ctrl-C and SIGTERM save and exit with the signal's code),
`divergence` (non-finite losses found without waiting for the device; nothing non-finite saved) and `memory` (a
step that cannot fit refused before it is allocated)."""
