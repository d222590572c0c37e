"""The porting assistant: CUDA->HIP translation and lints, docs ingest and retrieval, the chat agent."""
