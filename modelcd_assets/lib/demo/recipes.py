"""The demo's fine-tuning recipes: the good adapter (also what the fault sandbox retrains its clean controls with) and the worse one."""

from modelcd_assets.lib.model.training import Training

GOOD = Training(steps=200, learning_rate=1e-3, seed=0)
# A plausible but worse fine-tune the gates must block: a tenth of the data, a fifth of it mislabelled.
WORSE = Training(steps=150, learning_rate=2e-3, seed=1, label_noise=0.15)
WORSE_TRAIN_EXAMPLES = 300
