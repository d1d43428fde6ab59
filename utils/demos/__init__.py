"""Section-specific demo and figure code that would clutter a notebook (one module per section)."""
