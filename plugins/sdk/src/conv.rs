//! The one list of the records of `chitin:policy` and their fields, as the
//! conversions between the SDK's plain types and the types a bindings
//! generator makes of them. Both sides instantiate it: the guest glue of
//! this crate (wit-bindgen) and the host (wasmtime's bindgen), once per
//! interface version whose records match the SDK's.

/// Emits, at the call site, a crate-private trait `Conv<T>` (a lossless
/// conversion) implemented both ways between every SDK record, enum and
/// [`PolicyError`](crate::PolicyError) and its generated twin, plus the
/// generic impls for `Vec`, `Option`, pairs and the scalar types.
///
/// Each argument is a module in scope at the call site: `types` holds the
/// generated `chitin:policy/types` records, the others the request records
/// of each slot's interface.
///
/// Not public API: its shape follows the bindings generators.
#[doc(hidden)]
#[macro_export]
macro_rules! __policy_conversions {
    (types: $t:ident, instance_id: $i:ident, placement: $p:ident, split: $s:ident, drain: $d:ident $(,)?) => {
        $crate::__policy_conversions! {
            @emit
            cases {
                NodeState => $t::NodeState { Joining, Active, Leaving, Down }
                ShardState => $t::ShardState { Active, Splitting, Activating, Inactive }
            }
            records {
                Label => $t::Label { key, value }
                Node => $t::Node { id, address, zone, labels, state }
                Shard => $t::Shard { id, application, lower, upper, state, parent }
                Replica => $t::Replica { id, shard, node }
                ShardLoad => $t::ShardLoad { shard, keys, bytes, ops_per_sec }
                RangeLoad => $t::RangeLoad { lower, upper, keys, bytes, ops_per_sec }
                Holder => $t::Holder { shard, node }
                HolderRanking => $t::HolderRanking { shard, nodes }
                ShardPlacement => $t::ShardPlacement { shard, nodes }
                ReplicaMove => $t::ReplicaMove { shard, replica, source, target }
                Handoff => $t::Handoff { shard, source, target }
                NodeShortage => $t::NodeShortage { needed, eligible }
                InstanceContext => $i::InstanceContext { env, hostname }
                PlacementRequest => $p::PlacementRequest { nodes, shards, replicas, new_shards, replication_factor }
                RebalanceRequest => $p::RebalanceRequest { nodes, shards, replicas, holders, load }
                RankingRequest => $p::RankingRequest { nodes, shards, replicas }
                SplitRequest => $s::SplitRequest { shard, children, at, load, samples }
                DrainRequest => $d::DrainRequest { leaving, nodes, shards, replicas, holders, load, max_per_round }
            }
            errors $t::PolicyError {
                InsufficientNodes, UnknownShard, UnknownNode, InvalidSplit, InvalidInput, Unsupported
            }
        }
    };
    (
        @emit
        cases { $($ce:ident => $cw:path { $($c:ident),* })* }
        records { $($re:ident => $rw:path { $($f:ident),* })* }
        errors $ew:path { $($ev:ident),* }
    ) => {
        /// A lossless conversion between an SDK type and its generated twin.
        pub(crate) trait Conv<T> {
            fn conv(self) -> T;
        }

        impl Conv<String> for String {
            fn conv(self) -> String {
                self
            }
        }
        impl Conv<u32> for u32 {
            fn conv(self) -> u32 {
                self
            }
        }
        impl Conv<u64> for u64 {
            fn conv(self) -> u64 {
                self
            }
        }
        impl Conv<f64> for f64 {
            fn conv(self) -> f64 {
                self
            }
        }

        impl<A: Conv<B>, B> Conv<Vec<B>> for Vec<A> {
            fn conv(self) -> Vec<B> {
                self.into_iter().map(Conv::conv).collect()
            }
        }

        impl<A: Conv<B>, B> Conv<Option<B>> for Option<A> {
            fn conv(self) -> Option<B> {
                self.map(Conv::conv)
            }
        }

        impl<A: Conv<C>, B: Conv<D>, C, D> Conv<(C, D)> for (A, B) {
            fn conv(self) -> (C, D) {
                (self.0.conv(), self.1.conv())
            }
        }

        $(
            impl Conv<$cw> for $crate::$ce {
                fn conv(self) -> $cw {
                    use $cw as W;
                    match self { $($crate::$ce::$c => W::$c),* }
                }
            }
            impl Conv<$crate::$ce> for $cw {
                fn conv(self) -> $crate::$ce {
                    use $cw as W;
                    match self { $(W::$c => $crate::$ce::$c),* }
                }
            }
        )*

        $(
            impl Conv<$rw> for $crate::$re {
                fn conv(self) -> $rw {
                    let $crate::$re { $($f),* } = self;
                    $rw { $($f: $f.conv()),* }
                }
            }
            impl Conv<$crate::$re> for $rw {
                fn conv(self) -> $crate::$re {
                    use $rw as W;
                    let W { $($f),* } = self;
                    $crate::$re { $($f: $f.conv()),* }
                }
            }
        )*

        impl Conv<$ew> for $crate::PolicyError {
            fn conv(self) -> $ew {
                use $ew as W;
                match self { $($crate::PolicyError::$ev(x) => W::$ev(x.conv())),* }
            }
        }
        impl Conv<$crate::PolicyError> for $ew {
            fn conv(self) -> $crate::PolicyError {
                use $ew as W;
                match self { $(W::$ev(x) => $crate::PolicyError::$ev(x.conv())),* }
            }
        }
    };
}
