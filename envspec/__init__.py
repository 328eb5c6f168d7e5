"""The environment model: the typed loader of `gitops/environments/<env>/environment.yaml`.

Both sides of the platform read it: the CDK stacks (`stacks/`) and the cdk8s charts
(`cdk8s/charts`, package `charts`), so neither imports the other. It never imports AWS CDK
or cdk8s.
"""
