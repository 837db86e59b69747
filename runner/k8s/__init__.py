"""flow-runner on Kubernetes, which spreads invocations over machines: the in-pod job
wrapper (``wrapper``, ``termination``), the Job manifests it runs under (``manifests``,
``images``), and its results read back from pod logs (``logs``).
"""
