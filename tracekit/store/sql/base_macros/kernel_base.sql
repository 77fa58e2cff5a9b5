-- A kernel's meaningful name, what kernel-name rules match: its inner name without template and parameter lists
-- (what it does, not its argument types). The raw name stays in gpu_ops.name. In order: `(anonymous namespace)::`
-- is dropped; so is a return type (`void `, `std::enable_if<...>::type `); then launch wrappers, nested or not, give
-- way to their kernel argument (the first template argument with a `::`: leading numbers, flags and plain types
-- such as `float` are skipped), so `cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...>>>` is
-- `flash::FlashAttnFwdSm90`. The wrappers: CUTLASS's `cutlass::device_kernel`, `cutlass::Kernel`, `cutlass::Kernel2`;
-- composable_kernel's `ck_tile::kentry`; FlashAttention 3's architecture guards `flash::enable_sm*`; PyTorch's
-- launchers of functors and lambdas `at::native::*elementwise_kernel*`, `reduce_kernel`, `ReduceOp`,
-- `gpu_kernel_impl*` and the `[AB]UnaryFunctor` / `BinaryFunctor` adapters (the meaningful name is the functor:
-- `at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>` is `at::native::FillFunctor`).
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates kernel_base
CREATE OR REPLACE {{macro}} kernel_base(name) AS (
    regexp_replace(
        regexp_replace(
            regexp_replace(replace(name, '(anonymous namespace)::', ''), '^(void|std::enable_if<.*?>::type) +', ''),
            '^((cutlass::(device_kernel|Kernel2?)|ck_tile::kentry|flash::enable_sm\w*|at::native::(\w*elementwise_kernel\w*|reduce_kernel|ReduceOp|gpu_kernel_impl\w*|[AB]?(Unary|Binary)Functor)) *<([^<>,:()]*, *)*)+',
            ''),
        '[<>(,].*$', '')
);
