"""The JupyterHub engine: a hub whose spawn hooks (:mod:`gpuseat.jupyterhub`) give each server its
participant's seat; the engine stops the servers of people the store no longer gives a seat, keeps
the seats' state and way in true, and probes each seat as its participant through the hub's REST API."""
