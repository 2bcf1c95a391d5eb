"""Environment roles as pinned images: locks, Dockerfile checks, dependency locks, builds."""
