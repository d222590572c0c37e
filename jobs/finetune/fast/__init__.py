"""hipbot's fast training path: fused kernels, padding-free batches, a loss that never builds the logits.

``plan.decide`` says which pieces a job gets (and why a model falls back to the plain path);
``apply`` installs them on the loaded model; the collators in ``collate`` make the batches the
varlen attention of ``attention`` reads. Every piece computes the same function as the plain
transformers path (tests/finetune/test_fast.py checks the loss on CPU).
"""
