# Signed run manifests: keys and audit (docs/manifests.md).
.PHONY: keys audit
TRUST ?=
AUDIT_ROOT ?= .
ALLOW_UNTRUSTED ?=

keys: setup ## create the Ed25519 manifest signing key if missing, then show it
	@if $(INFKIT) keys show >/dev/null 2>&1; then $(INFKIT) keys show; else $(INFKIT) keys init; fi

audit: setup ## audit every manifest under manifests/ (TRUST=FILE: trust policy; ALLOW_UNTRUSTED=1; AUDIT_ROOT=DIR)
	@if [ -n "$(TRUST)" ] && [ ! -f "$(TRUST)" ]; then \
	  echo "audit: TRUST=$(TRUST): no such trust policy file" >&2; exit 1; \
	fi; \
	if [ -z "$$(find "$(AUDIT_ROOT)/manifests" -name '*.intoto.json' -print -quit 2>/dev/null)" ]; then \
	  echo "audit: no signed manifests under $(AUDIT_ROOT)/manifests/ yet (a bench-NN target writes one per run)"; \
	else \
	  $(INFKIT) audit "$(AUDIT_ROOT)/manifests" --root "$(AUDIT_ROOT)" $(if $(TRUST),--trust "$(TRUST)") \
	    $(if $(filter 1,$(ALLOW_UNTRUSTED)),--allow-untrusted); \
	fi
