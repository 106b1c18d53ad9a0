"""The baselines NDVM is measured against, on the same programs and in the same run.

- :mod:`ndvm_bench.baselines.tagged`: every value a 14-element tagged tensor, a write-once dictionary
  heap, a trampoline, torch autograd (the DMCI cost model);
- :mod:`ndvm_bench.baselines.eager`: the structural/numeric split executed eagerly in Python + torch;
- :mod:`ndvm_bench.baselines.jax_baseline`: each program staged with ``jax.jit(jax.vmap(jax.value_and_grad))``
  (optional; needs JAX);
- the compiled C++ ceiling of ``kalman2d_T80`` lives in ``native/bench/`` (run by :mod:`ndvm_bench.compiled`).

``tagged`` and ``eager`` share one evaluator (:mod:`ndvm_bench.baselines.interp`) and differ only in the
representation of values, so their ratio measures the representation alone.
"""
