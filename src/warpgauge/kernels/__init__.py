"""One module per operator: the @triton.jit kernels, the plan that picks launch parameters, the
launcher, and the analytical traffic model (compulsory bytes, FLOPs) the harness reports against."""
