"""An emulated Kubernetes cluster for the kubernetes backend's tests: an in-memory API
server spoken to over real HTTP by the official client (`apiserver`), and one controller
thread that is the job controller, the scheduler, the garbage collector and the kubelet,
running every pod as a podman container on this host (`kubelet`). `fixtures` gives the
`kube_cluster` fixture (registered by tests/conftest.py).

It is not Kubernetes, only what a backend that submits Jobs needs to be tested against:

- Emulated: the REST paths, JSON shapes, defaults and Status errors of namespaces (read
  only), nodes (read only), configmaps, secrets, events, jobs (batch/v1) and pods (read,
  patch, delete; the job controller makes them) and SelfSubjectAccessReview; label and field
  selectors; merge, strategic-merge (as a merge patch) and JSON patches; resourceVersion
  preconditions; deletion with grace periods, finalizers and the Foreground, Background and
  Orphan propagation policies (a Job's default is Orphan, as the real API's); owner
  references and garbage collection; a Job's pod, its status and conditions, backoffLimit,
  activeDeadlineSeconds, ttlSecondsAfterFinished, suspension and podFailurePolicy; scheduling
  on nodes' extended resources (nvidia.com/gpu), cpu and memory requests, nodeSelector,
  required node affinity, taints and tolerations and scheduling gates, with the real
  scheduler's messages; the kubelet's image pulls, env (literal, secretKeyRef,
  configMapKeyRef, fieldRef, envFrom), configMap, secret and emptyDir volumes,
  termination messages, runAsUser, memory limits, graceful stops and pod logs.
- Not emulated: watches, server-side apply, RBAC beyond a deny set of (verb, group,
  resource), admission (no quotas, no LimitRanges, no Kueue: a test admits a suspended Job
  with `admit`), other kinds (Deployments, Services, ...), sidecar containers (a pod runs its
  init containers, then its first container only), restarts (OnFailure is accepted but a failed
  container is not restarted: each failure is a new pod, as with Never), indexed Jobs and
  parallelism above one, back-off delays between a Job's pods, real GPUs (the resources
  are only counted), node conditions, pod networking (each pod has its own slirp4netns
  network from which 10.0.2.2 is the host's loopback), strategic merge's list merging and
  directives, pagination (`limit` is ignored: every list is complete).
"""

from tests.providers.kube.fixtures import EmulatedCluster

__all__ = ["EmulatedCluster"]
