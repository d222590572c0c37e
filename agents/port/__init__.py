"""agents/port: `hipbot port`, whole CUDA projects to HIP, compiled and repaired for AMD GPUs."""
