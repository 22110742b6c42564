//! koordlet's runtime hook entry points, fed the bytes a runtime proxy or a
//! container runtime sends, down to the pure decision core (no server, no
//! cgroup writes: the cgroup root does not exist):
//!
//! - selectors `0`–`7`: a RuntimeHookService request (`runtime.v1alpha1`
//!   protobuf) for each hook stage, decoded as the gRPC server does, turned
//!   into the hook context, checked for scope and run through every hook by
//!   the dispatcher, and answered;
//! - selector `8`: an NRI Plugin-service call — the second byte picks the
//!   method, the rest is its protobuf request — through `NriPlugin::handle`;
//! - selector `9`: raw bytes of the NRI socket (multiplexer frames carrying
//!   ttrpc messages) through the frame decoder, each request answered by
//!   the plugin.
//!
//! The byte after the selector (for `0`–`7`) or the selector's high bits
//! choose one of the dispatchers of `koord_fuzz::DISPATCHERS` (cgroup v1 or
//! v2, failure policy, default or rich node rules).
#![no_main]

use apis::runtime::v1alpha1 as wire;
use koord_fuzz::{DISPATCHERS, select};
use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::nri::connection::{PLUGIN_SERVICE, answer};
use koordlet::runtimehooks::nri::proto::ttrpc as envelope;
use koordlet::runtimehooks::nri::ttrpc::{FrameDecoder, MessageKind, PLUGIN_CONN};
use koordlet::runtimehooks::nri::{NriPlugin, NriState, NriStatus};
use koordlet::runtimehooks::protocol::{
    Adjustment, ContainerContext, HookRequest, HookStage, PodContext,
};
use koordlet::runtimehooks::scope::check_fs;
use libfuzzer_sys::fuzz_target;
use prost::Message as _;

const NRI_METHODS: [&str; 8] = [
    "Configure",
    "Synchronize",
    "CreateContainer",
    "UpdateContainer",
    "StopContainer",
    "StateChange",
    "Shutdown",
    "NoSuchMethod",
];

fn look_at(adjustment: &Adjustment) {
    for effect in &adjustment.side_effects {
        let _ = (effect.summary(), effect.resource_label());
    }
}

fn hook_service(dispatcher: &HookDispatcher, stage: HookStage, bytes: &[u8]) {
    if stage.is_pod_level() {
        let Ok(request) = wire::PodSandboxHookRequest::decode(bytes) else {
            return;
        };
        let context = PodContext::from(&request);
        let _ = context.cgroup_dir(dispatcher.layout());
        if let Ok(adjustment) = dispatcher.run_checked(stage, &HookRequest::Pod(context), check_fs)
        {
            look_at(&adjustment);
            let _ = adjustment.to_pod_response(&request).encode_to_vec();
        }
    } else {
        let Ok(request) = wire::ContainerResourceHookRequest::decode(bytes) else {
            return;
        };
        let context = ContainerContext::from(&request);
        let _ = context.cgroup_dir(dispatcher.layout());
        if let Ok(adjustment) =
            dispatcher.run_checked(stage, &HookRequest::Container(context), check_fs)
        {
            look_at(&adjustment);
            let _ = adjustment.to_container_response(&request).encode_to_vec();
        }
    }
}

fn plugin(index: u8) -> NriPlugin {
    let dispatcher = &DISPATCHERS[usize::from(index) % DISPATCHERS.len()];
    NriPlugin::new(dispatcher.clone(), None, NriStatus::new(NriState::Disabled))
}

fn nri_stream(plugin: &NriPlugin, bytes: &[u8]) {
    let mut decoder = FrameDecoder::new();
    // Socket reads arrive in pieces; split where the input says.
    for chunk in bytes.chunks(97) {
        decoder.feed(chunk);
        loop {
            match decoder.next_message() {
                Ok(Some(message)) => {
                    if message.conn != PLUGIN_CONN || message.kind != MessageKind::Request {
                        continue;
                    }
                    let Ok(request) = envelope::Request::decode(message.payload.as_slice()) else {
                        continue;
                    };
                    let _ = request.service == PLUGIN_SERVICE;
                    let _ = answer(plugin, &request).encode_to_vec();
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((selector, rest)) = select(data, 10) else {
        return;
    };
    match selector {
        0..=7 => {
            let Some((choice, bytes)) = rest.split_first() else {
                return;
            };
            let dispatcher =
                &DISPATCHERS[usize::from(choice.wrapping_sub(b'0')) % DISPATCHERS.len()];
            hook_service(dispatcher, HookStage::ALL[usize::from(selector)], bytes);
        }
        8 => {
            let Some((method, bytes)) = rest.split_first() else {
                return;
            };
            let method = usize::from(method.wrapping_sub(b'0'));
            let plugin = plugin((method / NRI_METHODS.len()) as u8);
            let _ = plugin.handle(NRI_METHODS[method % NRI_METHODS.len()], bytes);
        }
        _ => {
            let Some((choice, bytes)) = rest.split_first() else {
                return;
            };
            nri_stream(&plugin(choice.wrapping_sub(b'0')), bytes);
        }
    }
});
