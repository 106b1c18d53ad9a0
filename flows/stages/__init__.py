"""The stages of a discovery run, in the order data moves through them: propose, admit,
calibrate, score, log (one module each, each an object that owns its state), the run's clock and
budget (clock.py), and the Prefect tasks the stages' work runs in (tasks.py). The coordinator that
drives them is ``flows.discover.Discovery``. See docs/architecture.md for where to add a stage."""
