"""attnlab inside other libraries: ``attnlab.integrations.transformers`` makes attnlab a Hugging Face
``attn_implementation`` (importing it registers ``"attnlab"``; it needs the ``[hf]`` extra)."""
