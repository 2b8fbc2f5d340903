"""Many clients' local training as one vectorised computation over stacked per-client
weights (torch.func ``functional_call`` + ``vmap`` + ``grad``), for the in-process engine.

``fedapp.batched.train.train_clients`` reproduces ``fedapp.core.train.local_train`` for each
client of a batch: same minibatches (each client's own generator), same loss, same
optimizer rules, same masks; ``docs/batched.md`` says what is exact and what is within
float tolerance.
"""
