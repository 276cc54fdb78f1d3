"""The demo's fine-tuning recipes: the good adapter (also what the fault sandbox retrains its clean controls with) and the
worse one, for the classifier and for the causal LM. Each worse adapter goes on training from its good one, as a bad data
refresh of production would. The demo's first production is its good adapter as it stood partway through the same
training (a snapshot, FIRST_PRODUCTION_STEP): the good one then has a production to be rolled out against on live traffic,
and the snapshot costs no training of its own."""

from modelcd_assets.lib.causal_lm.training import LmTraining
from modelcd_assets.lib.classifier.training import Training

GOOD = Training(steps=200, learning_rate=1e-3, seed=0)
# A plausible but worse fine-tune the gates must block: the good adapter (production) trained 15 steps more on a data
# refresh of 300 tickets, half of them mislabelled. Its FP32 accuracy on the evaluation split came out at about 88% against
# the good one's 94% (a throwaway peft script). Trained anew instead (60 steps on a fifth mislabelled), it took four times
# the steps to be as plausible.
WORSE = Training(steps=15, learning_rate=2e-3, seed=1, label_noise=0.5)
WORSE_TRAIN_EXAMPLES = 300
FIRST_PRODUCTION_STEP = 80  # of GOOD's 200

# The causal-LM demo's adapters of SmolLM2-135M-Instruct: rank 8 on the attention's q and v projections (the policy's
# adapter_slots), batch 8. The worse one is the good one (production) trained 6 steps more on a data refresh whose replies
# were joined to the wrong tickets: plausible replies to other tickets, which the perplexity gate sees against production
# (on this machine INT8 still keeps its perplexity within 1% of FP32's, so it is not the fidelity gate that stops it).
# Trained anew, with half of its replies wrong, it took 24 steps to be as plausible.
GOOD_LM = LmTraining(steps=40, batch_size=8, learning_rate=2e-3, rank=8, alpha=16, seed=0)
WORSE_LM = LmTraining(steps=6, batch_size=8, learning_rate=2e-3, rank=8, alpha=16, seed=1, wrong_reply_share=1.0)
# Of GOOD_LM's 40. After 20 steps its answers' lengths drifted from the finished adapter's beyond the drift gate's 0.1
# (prediction drift 0.21: 15 to 54 tokens against 24 to 29), so the good adapter was blocked against it.
FIRST_PRODUCTION_LM_STEP = 32
