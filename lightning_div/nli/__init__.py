"""NLI Diversity with a Hugging Face NLI model, and Diversity Threshold Generation (Stasaski & Hearst, 2022).

``scorer`` runs the NLI model over the ordered pairs of a response set (the formulas are in
:mod:`lightning_div.metrics.nli`); ``threshold`` resamples a set until it is diverse enough.
"""
