# Environment-role images (docs/images.md). ROLE=<role> picks one; without it, every role.
# ENGINE=docker|podman overrides detection; BASE_IMAGE=<local ref> builds on a substitute base
# (recorded in the image's labels and in every run that uses it). WHEELHOUSE=off builds from the
# indexes only; by default the host's pip fills a hash-checked wheelhouse where a Dockerfile takes one.
ROLE       ?=
ENGINE     ?=
BASE_IMAGE ?=
WHEELHOUSE ?=
# PULL_ONLY=1: a role image with neither a local build nor a pushed digest is an error, never
# built on first use (harness/runtime/docker_image.py); any target that starts a container obeys it.
PULL_ONLY ?=
export INFKIT_PULL_ONLY := $(PULL_ONLY)
IMAGE_ROLES = $(or $(ROLE),$(shell ls images/*.lock.json 2>/dev/null | sed -e 's|images/||' -e 's|\.lock\.json||'))
ENGINE_ARG  = $(if $(ENGINE),--engine $(ENGINE))

# REGISTRY=host[:port][/namespace]: where `make push` pushes and `make lock` / `make lock-base` ask.
REGISTRY   ?=
REPIN      ?=

.PHONY: images push pull lock lock-base images-check

images: setup ## build role images (ROLE=..., ENGINE=docker|podman, BASE_IMAGE=local base, WHEELHOUSE=auto|off|DIR)
	@set -e; for r in $(IMAGE_ROLES); do \
	  $(INFKIT) images build $$r $(ENGINE_ARG) $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) \
	    $(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE)); done

push: setup ## push local builds to REGISTRY/<role>:<tag> and sign their provenance (ROLE=..., REGISTRY=...)
	@test -n "$(REGISTRY)" || { echo "make push needs REGISTRY=host[:port][/namespace]" >&2; exit 2; }
	@set -e; for r in $(IMAGE_ROLES); do $(INFKIT) images push $$r --registry $(REGISTRY) $(ENGINE_ARG); done

pull: setup ## pull role images by the digest in their locks, verified against the registry (ROLE=...)
	@set -e; for r in $(IMAGE_ROLES); do $(INFKIT) images pull $$r $(ENGINE_ARG); done

lock: setup ## refresh image locks with the registry's digest after a push (ROLE=..., REGISTRY=..., DIGEST=sha256:...)
	@set -e; for r in $(IMAGE_ROLES); do \
	  $(INFKIT) images lock $$r $(if $(DIGEST),--digest $(DIGEST)) $(if $(REGISTRY),--registry-ref $(REGISTRY)/$$r); done

lock-base: setup ## resolve a role's base tag to its registry digest (ROLE=..., REGISTRY=mirror, REPIN=1)
	@set -e; for r in $(IMAGE_ROLES); do \
	  $(INFKIT) images lock-base $$r $(if $(REGISTRY),--registry $(REGISTRY)) $(if $(REPIN),--repin); done

images-check: setup ## hadolint + digest pins + locks consistent with their files
	$(INFKIT) images check $(IMAGE_ROLES)
