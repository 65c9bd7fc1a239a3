"""Goal mode: the objective a client sets (``model``) and its keeper, a participant of the loop (``keeper``)."""
