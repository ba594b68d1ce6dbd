# A SigLIP-shaped MLP block on tiny with the planner's own plan.
MODEL="--target=tiny --tokens=12 --width=32 --mlp_width=64 --heads=4"
