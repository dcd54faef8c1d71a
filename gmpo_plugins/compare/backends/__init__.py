"""Framework backends: one policy-loss call through each framework's own call path.

base.py        the interface (``PolicyLossCall``, ``LossBackend``, ``ParityTarget``), the
               core backend, the translations several backends share, the framework table
               and where each framework runs (this process or a subprocess of its virtualenv)
verl.py, openrlhf.py, trl.py, skyrl.py
               one backend per framework, through its adapter and its real call site,
               with the framework's own losses as parity targets
trl_gmpo.py    TRL's GMPOTrainer loss run on given tensors by a stand-in trainer (no model,
               no generation), shared by the TRL backend and the parity reference
"""
