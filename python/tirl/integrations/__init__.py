"""Drop-ins for the trainers people run: :mod:`tirl.integrations.verl` and
:mod:`tirl.integrations.trl`. Neither imports its trainer; both only follow its
conventions (the commit each was read from is named in its module docstring)."""
