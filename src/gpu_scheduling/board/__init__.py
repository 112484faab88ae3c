"""gpu-board: the cluster's GPUs as a live board grouped by topology (who holds which GPU, by which source, and
where the sources disagree), with a create form. `state` builds the board from watched objects (pure), `forms`
turns the form into objects (pure), `server` serves the page, the state and its event stream, `main` wires the
informers."""
