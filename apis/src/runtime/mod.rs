//! RuntimeHookService (package runtime.v1alpha1).
