"""Which exchanges a run keeps: the display filter, the topics and groups
an exchange names, the selection that combines them with the time window."""
