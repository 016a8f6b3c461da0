"""Application masters: one process per training job (torch lives here and nowhere else)."""
