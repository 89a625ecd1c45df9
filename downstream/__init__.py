"""downstream: VTAB-1k transfer with fresh homoscedastic heads (added by the downstream stage)."""
