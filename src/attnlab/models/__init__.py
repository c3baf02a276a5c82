"""attnlab.models: complete models built from attnlab.nn (import the submodule you need)."""
