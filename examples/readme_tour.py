"""The README's short tour: a Pipeline, GridSearchCV with sites, a stream, a private stream,
the search again with metadata routing (tests/test_cli.py checks this file is the README's code)."""

import numpy as np
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skfedpriv import DWDClassifier
from skfedpriv.datasets import load_breast_cancer_sites

X, y, sites = load_breast_cancer_sites(n_sites=4)   # 4 hospitals, not IID

# A Pipeline: the site labels go to the estimator's fit.
pipe = make_pipeline(StandardScaler(), DWDClassifier())
pipe.fit(X, y, dwdclassifier__sample_group=sites)

# GridSearchCV with sites: GroupKFold holds out whole sites, and
# sample_group is sliced per split like any fit parameter.
search = GridSearchCV(pipe, {"dwdclassifier__alpha": [1e-3, 1e-2, 1e-1]},
                      cv=GroupKFold(n_splits=4))
search.fit(X, y, groups=sites, dwdclassifier__sample_group=sites)
print(search.best_params_, round(search.best_score_, 3))

# A stream: each call is one batch; the model keeps O(p^2) summaries, no rows.
scaled = StandardScaler().fit_transform(X)
clf = DWDClassifier()
for batch in np.array_split(np.arange(len(y)), 10):
    clf.partial_fit(scaled[batch], y[batch], sample_group=sites[batch], classes=[0, 1])
print(round(clf.score(scaled, y), 3))

from skfedpriv import PrivacyBudget

budget = PrivacyBudget(epsilon=3.0, delta=1e-5)      # shared by clones; path=... shares it across processes
private = DWDClassifier(mechanism="local-gaussian", epsilon=1.0, delta=1e-6,
                        clip_norm=6.0, budget=budget, classes=[0, 1])
for batch in np.array_split(np.arange(len(y)), 4):
    private.partial_fit(scaled[batch], y[batch], sample_group=sites[batch])
print(private.privacy_spent_, budget.spent)
published = private.release()   # share this, not `private` (it holds the noise state)

import sklearn

with sklearn.config_context(enable_metadata_routing=True):
    search.fit(X, y, groups=sites, sample_group=sites)
print(search.best_params_, round(search.best_score_, 3))
