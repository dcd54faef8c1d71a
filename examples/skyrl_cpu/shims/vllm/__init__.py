"""Stand-ins for the vLLM modules skyrl's FSDP policy worker and config use, CPU runs only.

skyrl sends the policy's weights to the inference engines through vLLM's weight-transfer
engines; vLLM and NCCL need a GPU. ``distributed.weight_transfer.nccl_engine`` here keeps the
trainer-side interface of vLLM's NCCL engine (skyrl 0.3.0's ``NCCLWeightTransferEngine``, used
by ``weight_sync/broadcast_strategy.py``; skyrl 0.4.0's ``NCCLTrainerWeightTransferEngine``,
built through ``factory.WeightTransferTrainerFactory`` by ``weight_sync/weight_senders.py``) and
carries the tensors to the CPU engine (``skyrl_cpu.engine``) through Ray instead. For skyrl
0.4.0 also: ``distributed.weight_transfer.base`` (the ``WeightSource`` contract SkyRL's
sources implement), ``packed_tensor`` and ``ipc_engine`` (names SkyRL imports or registers),
and ``v1.worker.gpu_model_runner`` (a class its config validation patches). Nothing else of
vLLM exists. Each module's docstring says what it replaces.
"""
