"""Fine-tuning: job spec, queue, coordinator, worker, trainer, adapter registry, vLLM publishing."""
