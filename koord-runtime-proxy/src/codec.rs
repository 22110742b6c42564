//! gRPC codecs for intercepted calls: the serving side keeps the request's
//! bytes next to the decoded message, the forwarding side sends bytes as given.

use std::marker::PhantomData;

use prost::bytes::{Buf, BufMut, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// A decoded request and the bytes it came from.
#[derive(Debug, Clone)]
pub struct Received<T> {
    pub message: T,
    pub raw: Bytes,
}

/// Server codec: decodes `Req` keeping its bytes, encodes `Resp` with prost.
pub struct ReceivingCodec<Req, Resp>(PhantomData<fn() -> (Req, Resp)>);

impl<Req, Resp> Default for ReceivingCodec<Req, Resp> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

pub struct ReceivedDecoder<Req>(PhantomData<fn() -> Req>);

impl<Req: prost::Message + Default> Decoder for ReceivedDecoder<Req> {
    type Item = Received<Req>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        let raw = src.copy_to_bytes(src.remaining());
        // Same status as tonic's prost codec gives for undecodable input.
        let message =
            Req::decode(raw.clone()).map_err(|error| Status::internal(error.to_string()))?;
        Ok(Some(Received { message, raw }))
    }
}

impl<Req, Resp> Codec for ReceivingCodec<Req, Resp>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
{
    type Encode = Resp;
    type Decode = Received<Req>;
    type Encoder = ProstEncoder<Resp>;
    type Decoder = ReceivedDecoder<Req>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ReceivedDecoder(PhantomData)
    }
}

/// Client codec: sends an already encoded request, decodes `Resp` with prost.
pub struct ForwardingCodec<Resp>(PhantomData<fn() -> Resp>);

impl<Resp> Default for ForwardingCodec<Resp> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

pub struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl<Resp> Codec for ForwardingCodec<Resp>
where
    Resp: prost::Message + Default + Send + 'static,
{
    type Encode = Bytes;
    type Decode = Resp;
    type Encoder = BytesEncoder;
    type Decoder = ProstDecoder<Resp>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}
