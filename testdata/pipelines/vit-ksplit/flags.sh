# A ViT-shaped MLP block on tiny with K-split GEMMs pinned (Complete
# staging: 16-bit partials are a decision), so that every
# pass of the pipeline makes transforming decisions.
MODEL="--target=tiny --preset=vit-b16-224 --tokens=10 --width=48 --mlp_width=96 --heads=3"
PLAN_OWNERSHIP_FLAGS="--recipe=testdata/pipelines/vit-ksplit/ksplit.recipe"
# F16: quantize-fp8 only logs that FP8 is off, so the decisions bisected
# here are the planner's and the lowering's (testdata/bisect).
QUANTIZE_FP8_FLAGS="--fp8=false"
