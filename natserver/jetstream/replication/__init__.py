"""JetStream in a cluster, the meta group's layer (issue #32), sans-IO: the meta entries'
codec (``entries``), the assignments table they build (``state``), placement (``placement``)
and the meta leader's side of the API (``leader``). See README.md."""
