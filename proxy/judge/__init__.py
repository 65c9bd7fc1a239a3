"""The judge: the model the guards ask whether a run really finished or progressed, behind one injected client."""
