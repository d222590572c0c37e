"""jobs/finetune."""
