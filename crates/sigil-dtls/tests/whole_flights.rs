/// The whole-flight carrier holds no send queue, reassembly buffer, messages kept ahead or
/// timer: its handshaking state is smaller than the record carrier's by at least the
/// reassembly buffer and the send queue.
#[test]
fn the_whole_flight_handshake_is_smaller_than_the_record_carriers() {
    use core::mem::size_of;
    let whole = size_of::<WholeFlights<(), NoTrust>>();
    let record = size_of::<sigil_dtls::Connection<(), NoTrust>>();
    println!("handshaking: whole flights {whole} bytes, record carrier {record} bytes");
    assert!(whole + sigil_dtls::flight::MAX_MESSAGE + sigil_dtls::flight::MAX_FLIGHT < record);
}
