// Compiles nothing: its target builds the precompiled <torch/torch.h> that
// the test programs reuse (Note [The test programs share one precompiled
// <torch/torch.h>] in test/CMakeLists.txt).
