"""attnlab.models: models built from attnlab's attention modules."""
